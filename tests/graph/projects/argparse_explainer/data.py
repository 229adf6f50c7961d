def cifar10_loader(root, batch_size):
    """The data code: torchvision is needed to train, not to import this file."""
    import torch
    from torchvision import datasets, transforms

    transform = transforms.Compose([transforms.RandomCrop(32, padding=4), transforms.ToTensor()])
    return torch.utils.data.DataLoader(datasets.CIFAR10(root, download=True, transform=transform),
                                       batch_size=batch_size, shuffle=True)
