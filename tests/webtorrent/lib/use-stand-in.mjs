// Import this before bittorrent-tracker is loaded (a dynamic import after
// it, or `node --import`): from then on WebRTC is lib/stand-in-webrtc.mjs.
import { register } from 'node:module'

register('./stand-in-hooks.mjs', import.meta.url)
