from .saliency import Saliency, GradCAM

__all__ = ["GradCAM", "Saliency"]
