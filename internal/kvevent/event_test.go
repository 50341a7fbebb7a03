package kvevent

import "testing"

func TestTierFromMedium(t *testing.T) {
	cases := map[string]Tier{
		"": TierDevice, "GPU": TierDevice, "DEVICE": TierDevice, "gpu": TierDevice, "weird": TierDevice,
		"CPU": TierHostPinned, "CPU_PINNED": TierHostPinned, "CPU_TIER1": TierHostPinned,
		"CPU_TIER2": TierDisk, "DISK": TierDisk, "NVME": TierDisk, "STORAGE": TierDisk,
		"EXTERNAL": TierExternal, "NETWORK": TierExternal, "REMOTE": TierExternal, "SHARED": TierExternal,
	}
	for m, want := range cases {
		if got := TierFromMedium(m); got != want {
			t.Errorf("TierFromMedium(%q) = %v, want %v", m, got, want)
		}
	}
}

func TestTierRoundTrip(t *testing.T) {
	for tr := TierDevice; tr < NumTiers; tr++ {
		if TierFromMedium(tr.Medium()) != tr {
			t.Errorf("medium %q of %v does not map back", tr.Medium(), tr)
		}
		p, err := ParseTier(tr.String())
		if err != nil || p != tr {
			t.Errorf("ParseTier(%q) = %v, %v", tr.String(), p, err)
		}
	}
	if _, err := ParseTier("gpu"); err == nil {
		t.Error("ParseTier accepted an unknown name")
	}
}
