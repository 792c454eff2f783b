import riftco.text


def test_version():
    assert riftco.text.__version__


def test_every_tokenizer_error_is_a_riftco_error_and_a_value_error():
    import pytest

    from riftco.core import RiftcoError

    errors = [
        getattr(riftco.text, name)
        for name in riftco.text.__all__
        if isinstance(getattr(riftco.text, name), type)
        and issubclass(getattr(riftco.text, name), Exception)
    ]
    assert riftco.text.TokenizerError in errors and riftco.text.StateError in errors
    assert all(issubclass(error, RiftcoError) and issubclass(error, ValueError) for error in errors)
    with pytest.raises(RiftcoError, match="empty"):
        riftco.text.ByteTokenizer.train("")
