"""A tiny external plugin for the plan DSL: ``use demo { gpu_hour = … }``."""
