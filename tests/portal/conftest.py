"""The portal's fixtures: an app with the portal on."""
import pytest

from portal_helpers import PORTAL


@pytest.fixture
def app_config(request):
    """The portal on, plus the closest ``app_config`` marker's overrides."""
    marker = request.node.get_closest_marker("app_config")
    return {**PORTAL, **(dict(marker.args[0]) if marker else {})}
