from steerlib.steering import Steering

__all__ = ["Steering"]
