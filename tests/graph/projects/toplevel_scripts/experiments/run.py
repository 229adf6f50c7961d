"""Run as `python experiments/run.py`: its imports start from experiments/."""
from common import Tiny
from watch import watch

if __name__ == "__main__":
    width = 32
    model = Tiny(width)
    grads = []
    watch(model.fc1, grads)
