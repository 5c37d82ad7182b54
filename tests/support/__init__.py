"""Helpers shared by the test modules: imported, never copied into a test module."""
