"""Cluster simulation: many hosts, a Kubernetes-like control plane (pod
placement, Knative-style autoscaling, keep-alive and scale-to-zero with cold
starts, a request router), and the cluster-sizing search.  docs/cluster.md
describes the model; ``simulate_cluster`` runs a trace on a cluster,
``consolidate`` finds the smallest cluster that meets the latency target."""
from backends.cluster.run import ClusterResult, simulate_cluster
from backends.cluster.sizing import consolidate, static_nodes

__all__ = ["ClusterResult", "simulate_cluster", "consolidate", "static_nodes"]
