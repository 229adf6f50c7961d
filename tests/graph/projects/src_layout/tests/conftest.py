import pytest

from camlib.models import SmallResNet


@pytest.fixture
def model():
    return SmallResNet(num_classes=3)
