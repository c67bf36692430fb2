"""Renderings of run records and plans: terminal tables, HTML reports, Prometheus metrics."""
