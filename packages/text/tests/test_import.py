import riftco.text


def test_version():
    assert riftco.text.__version__
