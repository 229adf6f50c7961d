from .models import Net


def save(module, grad_input, grad_output):
    print(grad_output[0].shape)


def attach(model):
    return model.block.conv.register_full_backward_hook(save)


if __name__ == "__main__":
    net = Net(16)
    attach(net)
