import torch
import torch.nn as nn


class PatchEmbed(nn.Module):
    def __init__(self, img_size=48, patch_size=16, in_chans=3, embed_dim=32):
        super().__init__()
        self.img_size = (img_size, img_size)
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        if tuple(x.shape[2:]) != self.img_size:
            raise ValueError(f"Input image size {tuple(x.shape[2:])} doesn't match model {self.img_size}")
        return self.proj(x).flatten(2).transpose(1, 2)


class TinyViT(nn.Module):
    def __init__(self, img_size=48, patch_size=16, in_chans=3, embed_dim=32, num_classes=10):
        super().__init__()
        self.img_size = img_size
        self.in_chans = in_chans
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim)
        self.pos = nn.Parameter(torch.zeros(1, (img_size // patch_size) ** 2, embed_dim))
        self.block = nn.TransformerEncoderLayer(embed_dim, 4, 64, batch_first=True)
        self.norm = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x) + self.pos
        x = self.norm(self.block(x))
        return self.head(x.mean(dim=1))
