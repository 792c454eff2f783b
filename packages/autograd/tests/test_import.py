import riftco.autograd


def test_version():
    assert riftco.autograd.__version__


def test_public_names_resolve():
    for name in riftco.autograd.__all__:
        assert getattr(riftco.autograd, name) is not None, name
