"""`fuseforge suite` and `fuseforge report`: many models, isolated, parallel, resumable, results in SQLite.

    jobs.py         what to run: model files (and candidates), their hashes, settings and commands
    execute.py      one phase of one job in its own process group, with a timeout; its outcome
    build.py        the default build phase (`python -m fuseforge.suite.build`): CPU stages, roofline floor,
                    CUDA extension prebuild
    environment.py  where a job ran: host, GPU, driver, torch, commit
    db.py           the SQLite file (schema documented there): runs, jobs, baselines; resume rules
    scheduler.py    the local scheduler: a CPU prebuild pool and one worker per GPU; the progress display
    ray_backend.py  the same jobs on a Ray cluster (optional extra `ray`)
    report.py       pure functions over job rows (fast_p, geomean...) and the terminal tables
    charts.py       PNG charts (matplotlib, Agg) and the HTML page
    fake_job.py     a stand-in job command for dry runs and tests (no GPU, no torch)
    cli.py          typer-free entry points and `register(app)` for the `suite` and `report` commands
"""
