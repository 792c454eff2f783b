"""riftco.NAME: ONE LINE."""

__version__ = "0.1.0"
