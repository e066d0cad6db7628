"""The choices of the cluster config's keys (scenarios/conf/cluster), kept
apart from the simulator so config checks can name them without loading it."""
PARALLEL = ("serial", "ray")                 # cluster.parallel
REQUEST_RULES = ("mean", "peak")             # cluster.cpu_request, besides millicores
LIMIT_RULES = ("request",)                   # cluster.cpu_limit, besides millicores and null
SEARCHES = ("none", "consolidate")           # cluster.search
TRACE_WORKLOADS = ("azure2019", "azure2021", "random")   # what a cluster replays
