package provider

import (
	"math"
	"math/big"
	"testing"
)

func TestConstraint(t *testing.T) {
	t.Parallel()
	known := func(n int64) Capacity { return Capacity{Known: true, Proxies: n, Binding: "b"} }
	for _, tc := range []struct {
		name string
		got  Capacity
		want Capacity
	}{
		{"int exact", Constraint(8, 4, "b"), known(2)},
		{"int floor", Constraint(11, 4, "b"), known(2)},
		{"int one below", Constraint(3, 4, "b"), known(0)},
		{"int at need", Constraint(4, 4, "b"), known(1)},
		{"int negative headroom", Constraint(-5, 4, "b"), known(0)},
		{"int zero need", Constraint(5, 0, "b"), Capacity{}},
		{"int zero need, negative headroom", Constraint(-1, 0, "b"), known(0)},
		{"int huge", Constraint(math.MaxInt64, 1, "b"), known(MaxCapacity)},
		{"uint floor", ConstraintUint64(20<<30, 4<<30, "b"), known(5)},
		{"uint below", ConstraintUint64(4<<30-1, 4<<30, "b"), known(0)},
		{"uint zero need", ConstraintUint64(1, 0, "b"), Capacity{}},
		{"uint huge", ConstraintUint64(math.MaxUint64, 1, "b"), known(MaxCapacity)},
		{"float floor", ConstraintFloat(24, 8, "b"), known(3)},
		{"float at need", ConstraintFloat(0.3, 0.3, "b"), known(1)},
		{"float just below", ConstraintFloat(math.Nextafter(8, 0), 8, "b"), known(0)},
		{"float just above one", ConstraintFloat(math.Nextafter(8, 16), 8, "b"), known(1)},
		{"float negative", ConstraintFloat(-1, 8, "b"), known(0)},
		{"float NaN headroom", ConstraintFloat(math.NaN(), 8, "b"), known(0)},
		{"float inf headroom", ConstraintFloat(math.Inf(1), 8, "b"), known(MaxCapacity)},
		{"float huge", ConstraintFloat(1e300, 1e-300, "b"), known(MaxCapacity)},
		{"float NaN need", ConstraintFloat(1, math.NaN(), "b"), Capacity{}},
		{"float inf need", ConstraintFloat(1, math.Inf(1), "b"), Capacity{}},
		{"float zero need", ConstraintFloat(1, 0, "b"), Capacity{}},
		{"float zero need, negative headroom", ConstraintFloat(-1, 0, "b"), known(0)},
		{"float zero need, NaN headroom", ConstraintFloat(math.NaN(), 0, "b"), known(0)},
		{"rat floor", ConstraintRat(big.NewRat(7, 2), big.NewRat(1, 2), "b"), known(7)},
		{"rat below", ConstraintRat(big.NewRat(499, 1000), big.NewRat(1, 2), "b"), known(0)},
		{"rat huge", ConstraintRat(new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), 200)), big.NewRat(1, 1000), "b"), known(MaxCapacity)},
		{"rat nil", ConstraintRat(nil, big.NewRat(1, 1), "b"), Capacity{}},
		{"rat zero need", ConstraintRat(big.NewRat(1, 1), new(big.Rat), "b"), Capacity{}},
		{"rat zero need, negative headroom", ConstraintRat(big.NewRat(-1, 1), new(big.Rat), "b"), known(0)},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
}

// TestFitAgreesWithComparison checks the boundary the headroom reasons
// rely on: a fit of 0 exactly when headroom < need.
func TestConstraintAgreesWithComparison(t *testing.T) {
	t.Parallel()
	needs := []float64{0, 1, 0.1, 0.3, 3, 8, 1e-9, 7e15, 1 << 53, 1e300}
	for _, need := range needs {
		for _, h := range []float64{need, math.Nextafter(need, 0), math.Nextafter(need, math.Inf(1)), need * 3, need*3 - need/1e9, 0} {
			c := ConstraintFloat(h, need, "")
			if c.Known && (c.Proxies >= 1) != (h >= need) || !c.Known && h < need {
				t.Errorf("ConstraintFloat(%v, %v) = %d, but headroom >= need is %v", h, need, c.Proxies, h >= need)
			}
		}
	}
}

func TestCapacityMin(t *testing.T) {
	t.Parallel()
	a := Capacity{Known: true, Proxies: 3, Binding: "pool default"}
	b := Capacity{Known: true, Proxies: 2, Binding: "memory"}
	tie := Capacity{Known: true, Proxies: 3, Binding: "nodes"}
	for _, tc := range []struct {
		name      string
		got, want Capacity
	}{
		{"lesser wins", a.Min(b), b},
		{"either order", b.Min(a), b},
		{"tie keeps the receiver", a.Min(tie), a},
		{"unknown does not count", a.Min(Capacity{}), a},
		{"unknown receiver", Capacity{}.Min(b), b},
		{"both unknown", Capacity{}.Min(Capacity{}), Capacity{}},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
}
