"""The web app (`trainforge serve`): launch, watch and stop training runs from a browser.

The server never trains in its own process: it validates the Train Model form with the same
validator as the CLI, starts `trainforge train` as a subprocess (Resume:
`trainforge train --resume runs/NAME`), records runs in SQLite and reads progress from the
run folder, whose layout `trainforge.runfolder.RunFolder` owns. Nothing here imports torch,
so the server stays small beside a run (on a Jetson both share one memory).

Modules: `settings` (paths, token, names), `db` (the SQLite run registry), `runner`
(subprocesses: start, stop, resume, adopt after a restart), `dialog` (the Train Model form:
defaults and validation), `run_files` (metrics records and run folder facts), `model_list`
(models/ folders), `system` (platform and live telemetry), `app_state` (what one server
instance holds, and a run's view), `api` (the JSON API), `app`
(pages, access token, the app factory), `serve` (the command).
"""
