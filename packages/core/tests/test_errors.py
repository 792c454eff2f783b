"""The error root: one class every riftco error derives from."""

from riftco.core import JSONError, RiftcoError


def test_json_error_is_a_riftco_error_and_a_value_error():
    assert issubclass(JSONError, RiftcoError)
    assert issubclass(JSONError, ValueError)
    assert issubclass(RiftcoError, Exception) and not issubclass(RiftcoError, ValueError)
