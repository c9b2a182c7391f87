// Package cluster owns how nodes find and agree with each other: the Raft
// group setup of a broker group (hashicorp/raft with raft-boltdb/v2 as log
// and stable store, a file snapshot store and a TCP transport), and the gRPC
// contract in cluster/pb. It knows no broker logic: the state machine is
// passed in.
package cluster
