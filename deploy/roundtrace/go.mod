module github.com/raftmq/raftmq/deploy/roundtrace

go 1.26.0

require golang.org/x/exp v0.0.0-20260908205506-85c1c2202aba
