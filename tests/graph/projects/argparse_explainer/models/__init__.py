from .nets import InplaceNet, PlainNet

NETWORKS = {"plain": PlainNet, "inplace": InplaceNet}


def get_network(name, **kwargs):
    return NETWORKS[name](**kwargs)
