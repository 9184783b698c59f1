"""Tests named after the repros in ../shared/repros/ (ids such as p08, c13, a12, r40)."""
