// Wrapper module: etcd's server and etcdctl modules carry `replace` lines, so
// `go install ...@version` refuses them; build them from this module instead.
module kubegan.local/etcd-binaries

go 1.24.0

require (
	go.etcd.io/etcd/etcdctl/v3 v3.6.8
	go.etcd.io/etcd/server/v3 v3.6.8
)
