from .gradcam import GradCAM

__all__ = ["GradCAM"]
