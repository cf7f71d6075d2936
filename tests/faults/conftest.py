"""The fault suite's runs are held to the rule every run keeps: ``tests/conftest.py:every_summary_balances``
checks, after each test, every ``summary.json`` its runs wrote, whatever their exit reason."""
