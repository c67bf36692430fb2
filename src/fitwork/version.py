"""The one place fitwork's version is written; packaging and records read it from here."""

__version__ = "0.2.0"
