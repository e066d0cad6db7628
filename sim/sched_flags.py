"""The flags of the scheduling-class interface (sim/sched_class.py), as in
kernel/sched/sched.h: what the machine, the fair-class policies, the RT
class and bandwidth control pass to enqueue/dequeue, select_task_rq and
balance.

A leaf module: sim/bandwidth.py needs them, and the compiled
sim/sched_class imports sim/rq.py (its argument types), which imports
sim/bandwidth.py, so they cannot live in sim/sched_class.py."""

# enqueue/dequeue flags
ENQUEUE_WAKEUP = 0x01
ENQUEUE_INITIAL = 0x80        # a new task (fork)
ENQUEUE_MIGRATED = 0x40
# a DELAY_DEQUEUE'd task (EEVDF, 6.12) woken where it still is queued
ENQUEUE_DELAYED = 0x200
DEQUEUE_SLEEP = 0x01
DEQUEUE_SPECIAL = 0x10        # a sleep that must not be delayed
DEQUEUE_DELAYED = 0x200       # finish a delayed dequeue

# wake flags
WF_FORK = 0x02
WF_TTWU = 0x08

# balancing idle types (enum cpu_idle_type)
CPU_IDLE = 0
CPU_NOT_IDLE = 1
CPU_NEWLY_IDLE = 2
