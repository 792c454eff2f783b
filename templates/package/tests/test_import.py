import riftco.NAME


def test_version():
    assert riftco.NAME.__version__
