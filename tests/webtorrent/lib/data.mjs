// The test file's bytes, made from a seed: the same in the page (which seeds
// them) and in Node (which works out the SHA-256 the download must have), so
// the expected hash never travels through the system under test.
//
// splitmix32: a 32-bit mixer, ample for bytes that only need to be
// incompressible and different per seed.

export function makeData (seed, size) {
  const out = new Uint8Array(size)
  let state = seed >>> 0
  for (let i = 0; i < size; i += 4) {
    state = (state + 0x9e3779b9) >>> 0
    let z = state
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b)
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35)
    z = (z ^ (z >>> 16)) >>> 0
    for (let j = 0; j < 4 && i + j < size; j++) out[i + j] = (z >>> (8 * j)) & 0xff
  }
  return out
}
