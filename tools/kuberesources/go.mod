module github.com/lethehq/lethe/tools/kuberesources

go 1.26.0
