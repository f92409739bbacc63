"""Worlds written independently of sensorbench (they import numpy and scipy only).

Each module generates data the way a separate program would — its own motion, its own
sensors and noise, its own files — so that the fitters and filters can be tested on
data the project did not generate (tests/test_foreign_independent.py checks the
imports).
"""
