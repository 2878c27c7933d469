"""`kubegan run`: a job's workers started as local processes (local_run.py) in a run directory
(rundir.py, resume_config.py), on free ports (ports.py), with a progress bar and a summary
(summary.py)."""
