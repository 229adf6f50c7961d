import argparse

from models import create_model
from pruner import InputSaliencyPruner


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="small_cnn", choices=["small_cnn", "wide_cnn"])
    parser.add_argument("--classes", default=10, type=int)
    args = parser.parse_args()
    model = create_model(args.model, num_classes=args.classes)
    pruner = InputSaliencyPruner(model)
    for step in range(1000):  # the training loop: never run by hooklint
        pass
    return pruner


if __name__ == "__main__":
    main()
