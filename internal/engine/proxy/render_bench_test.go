package proxy

import "testing"

// BenchmarkNFTPartialRender10k renders one Service added to 10,000 and taken away again as
// partial nftables renderings (RenderNFTablesPartial), without applying them: the user-space
// part of a change that every node pays before its transaction.
//
//	go test -run '^$' -bench NFTPartialRender10k -benchmem ./internal/engine/proxy/
func BenchmarkNFTPartialRender10k(b *testing.B) {
	svcs := benchSvcs(benchServices + 1)
	opt := Options{ClusterCIDR: "10.244.0.0/16"}
	_, st, _ := RenderNFTablesPartial(nil, svcs[:benchServices], opt)
	b.ResetTimer()
	for range b.N {
		in, added, _ := RenderNFTablesPartial(st, svcs, opt)
		if len(in) == 0 {
			b.Fatal("nothing rendered for the added Service")
		}
		if in, _, _ = RenderNFTablesPartial(added, svcs[:benchServices], opt); len(in) == 0 {
			b.Fatal("nothing rendered for the removed Service")
		}
	}
}
