package main

import "testing"

// The whole job's epoch: the planned ranks summed when all were planned,
// else their mean times the world size; dollars from both prices.
func TestJobEpochs(t *testing.T) {
	rows := []planRankRow{{Epoch: 0, Rank: 0, GETs: 100, ReadBytes: 1e9, CompareGETs: 10, CompareRead: 2e9}, {Epoch: 0, Rank: 1, GETs: 300, ReadBytes: 3e9},
		{Epoch: 1, Rank: 0, GETs: 50, ReadBytes: 5e8}}
	got := jobEpochs(rows, 2, requestPrices{per1kGETs: 0.4, perGB: 0.1})
	if len(got) != 2 {
		t.Fatalf("%d epochs, want 2", len(got))
	}
	e0, e1 := got[0], got[1]
	if !e0.Exact || e0.GETs != 400 || e0.ReadBytes != 4e9 || e0.CompareGETs != 10 || e0.Dollars != 0.4*0.4+0.1*4 {
		t.Fatalf("epoch 0 (both ranks planned): %+v", e0)
	}
	if e1.Exact || e1.RanksPlanned != 1 || e1.GETs != 100 || e1.ReadBytes != 1e9 || e1.Dollars != 0.4*0.1+0.1*1 {
		t.Fatalf("epoch 1 (one of two ranks): %+v", e1)
	}
}
