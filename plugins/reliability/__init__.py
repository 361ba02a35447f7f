"""What a long job loses to failures and the calendar: checkpoints (`checkpoint`,
`async_checkpoint`), rollbacks, stragglers, resharding, interruptions, and the finish time
against a deadline (`finish`). Imports nothing above `model`/`hardware`.
"""
