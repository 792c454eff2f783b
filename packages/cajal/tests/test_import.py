import pytest

import riftco.cajal


def test_version():
    assert riftco.cajal.__version__


def test_every_cajal_error_is_a_riftco_error():
    from riftco.core import RiftcoError

    errors = [
        getattr(riftco.cajal, name)
        for name in riftco.cajal.__all__
        if isinstance(getattr(riftco.cajal, name), type)
        and issubclass(getattr(riftco.cajal, name), Exception)
    ]
    assert riftco.cajal.CajalError in errors and riftco.cajal.ParseError in errors
    assert all(issubclass(error, RiftcoError) for error in errors)
    with pytest.raises(RiftcoError, match="line 1"):
        riftco.cajal.parse("let in")
