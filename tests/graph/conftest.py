"""The realistic projects under projects/ are inputs (their own tests and
conftest.py included), not tests of hooklint."""

collect_ignore = ["projects"]
