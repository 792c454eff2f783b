import riftco.cajal


def test_version():
    assert riftco.cajal.__version__
