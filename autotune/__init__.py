"""autotune: templates, config spaces, isolated measurement, tuners and tuning records.

import autotune as at
task = at.Task("matmul", (1024, 1024, 1024), target="host")
at.XGBTuner(task).tune(n_trial=200, measure_option=at.MeasureOption(number=5, repeat=3),
                       callbacks=[at.log_to_file(at.store.user_log("matmul")),
                                  at.progress_bar()])
with at.apply_history_best():      # the user's records ($PYPTO_HOME/logs), then the shipped
    s, args = at.get_template("matmul")(1024, 1024, 1024)

``at.TaskScheduler(tasks, weights, logs).tune(trials=..., minutes=...)`` shares one budget
among workloads by expected gain (``pypto-tune all``; ``at.standard_workloads()``).

``at.confirm_best(task, log, k)`` measures the k fastest configs of a log again
(``pypto-tune --confirm``); a config counts by the median of all its timings.
"""

from . import store
from .callbacks import log_to_file, progress_bar
from .confirm import confirm_best
from .dispatch import apply_history_best
from .measure import (
    EnvironmentFault,
    ErrorKind,
    MeasureOption,
    Measurer,
    MeasureResult,
    measure,
)
from .records import (
    Record,
    append_records,
    best_by_workload,
    load_records,
    pick_best,
    ranked_configs,
)
from .scheduler import TaskScheduler
from .space import Config, ConfigSpace, SpaceError
from .task import Task, Template, get_template, list_templates, template, workload_key
from .tuners import GATuner, GridSearchTuner, MeasureInput, RandomTuner, Tuner
from .workloads import Workload, load_workloads, standard_workloads
from .xgb_tuner import XGBTuner

__all__ = [
    "apply_history_best", "Record", "append_records", "best_by_workload", "load_records",
    "pick_best", "Config", "ConfigSpace", "SpaceError", "Task", "Template", "get_template",
    "list_templates", "template", "workload_key", "log_to_file", "progress_bar", "ErrorKind",
    "MeasureOption", "MeasureResult", "Measurer", "measure", "GATuner", "GridSearchTuner",
    "MeasureInput", "RandomTuner", "Tuner", "XGBTuner", "confirm_best", "ranked_configs", "store",
    "EnvironmentFault", "TaskScheduler", "Workload", "load_workloads", "standard_workloads",
]  # fmt: skip
