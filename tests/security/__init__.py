"""Tests of the trust model SECURITY.md states, and of hostile input."""
