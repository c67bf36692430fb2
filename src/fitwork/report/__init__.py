"""Renderings of run records: terminal tables now; HTML and Prometheus later."""
