// Module resolve hook (node:module register): `webrtc-polyfill` becomes
// lib/stand-in-webrtc.mjs.
export async function resolve (specifier, context, next) {
  if (specifier === 'webrtc-polyfill') {
    return { url: new URL('./stand-in-webrtc.mjs', import.meta.url).href, shortCircuit: true }
  }
  return next(specifier, context)
}
