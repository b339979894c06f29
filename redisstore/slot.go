package redisstore

// A bucket's Redis key is prefix + "{" + key + "}:" + rule: the request's key
// is the hash tag, so on a Cluster the buckets of every rule for one key (a
// user's per-user rules) share a slot, and a tier over them is one script
// call. A tier whose keys differ (a per-user rule beside a global one, whose
// key is empty) spans slots there; it then runs as ordered takes with
// refunds, as local tiers do (Store.AllowTier).

// slot is the Cluster hash slot of a Redis key: CRC16 (XMODEM) of its hash
// tag (the text between the first '{' and the next '}', when not empty) or of
// the whole key, modulo 16384, as Redis computes it.
func slot(key string) uint16 {
	if i := indexByte(key, '{'); i >= 0 {
		if j := indexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}
