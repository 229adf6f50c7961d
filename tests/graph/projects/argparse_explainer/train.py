"""Trains a network and explains it; the data and training code never run under hooklint."""
import argparse

import torch

from data import cifar10_loader
from explain.curvature import FactorStats
from explain.saliency import Explainer
from models import get_network

parser = argparse.ArgumentParser()
parser.add_argument("--network", default="plain", type=str)
parser.add_argument("--width", default=8, type=int)
parser.add_argument("--epochs", default=1, type=int)
parser.add_argument("--data", default="data", type=str)
args = parser.parse_args()

net = get_network(args.network, width=args.width)
net = net.to("cpu")

stats = FactorStats(net)
explainer = Explainer(net, net.features[-2])

loader = cifar10_loader(args.data, batch_size=64)
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
for epoch in range(args.epochs):
    for images, labels in loader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(net(images), labels).backward()
        optimizer.step()
