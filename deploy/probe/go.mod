module github.com/flagedge/flagedge/deploy/probe

go 1.26.8
