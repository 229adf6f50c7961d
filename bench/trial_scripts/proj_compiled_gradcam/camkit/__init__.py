from camkit.gradcam import GradCAM

__all__ = ["GradCAM"]
