"""Pure decisions, no I/O: context windows, calibration, recognising refusals, the retry's target."""
