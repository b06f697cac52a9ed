"""sporch orchestrator: cluster catalog, typed job configs, planner, scripts and submission.

Never imports torch (it runs on login nodes and laptops) and never imports the runtime at
module level.
"""

__version__ = "0.1.0"
