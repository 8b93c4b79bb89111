// Stands in for `webrtc-polyfill` (WebRTC for Node through node-datachannel,
// whose native part is not installed: npm runs no install scripts here). The
// tracker only relays the SDP that peers make, so bittorrent-tracker's Client
// can speak the whole WebSocket protocol with peer connections that make
// fixed, recognisable SDP, finish ICE gathering at once, and never connect.
// lib/use-stand-in.mjs makes `import 'webrtc-polyfill'` resolve here.

let made = 0
const tag = process.env.STAND_IN_TAG || `pid${process.pid}`

// The SDP a stand-in connection makes: its `a=x-stand-in` line names the
// process and the connection, so a test can tell that a relayed offer or
// answer arrived unchanged.
export function standInSdp (type, n) {
  return [
    'v=0',
    `o=- ${n} 2 IN IP4 127.0.0.1`,
    's=-',
    't=0 0',
    'a=group:BUNDLE 0',
    'm=application 9 UDP/DTLS/SCTP webrtc-datachannel',
    'c=IN IP4 0.0.0.0',
    'a=mid:0',
    'a=sctp-port:5000',
    `a=x-stand-in:${tag}-${type}-${n}`,
    ''
  ].join('\r\n')
}

class StandInChannel {
  constructor (label) {
    this.label = label
    this.readyState = 'connecting'
    this.bufferedAmount = 0
    this.binaryType = 'arraybuffer'
  }

  send () { throw new Error('stand-in data channel: never open') }
  close () { this.readyState = 'closed' }
}

export class RTCPeerConnection {
  constructor (config) {
    this.config = config
    this.n = ++made
    this.signalingState = 'stable'
    this.iceGatheringState = 'new'
    this.iceConnectionState = 'new'
    this.connectionState = 'new'
    this.localDescription = null
    this.remoteDescription = null
  }

  createDataChannel (label) { return new StandInChannel(label) }
  createOffer () { return Promise.resolve({ type: 'offer', sdp: standInSdp('offer', this.n) }) }
  createAnswer () { return Promise.resolve({ type: 'answer', sdp: standInSdp('answer', this.n) }) }

  setLocalDescription (description) {
    this.localDescription = { type: description.type, sdp: description.sdp }
    this.signalingState = description.type === 'offer' ? 'have-local-offer' : 'stable'
    // Gathering ends at once, with no candidates.
    setTimeout(() => {
      this.iceGatheringState = 'complete'
      this.onicegatheringstatechange?.()
      this.onicecandidate?.({ candidate: null })
    }, 0)
    return Promise.resolve()
  }

  setRemoteDescription (description) {
    this.remoteDescription = { type: description.type, sdp: description.sdp }
    this.signalingState = description.type === 'offer' ? 'have-remote-offer' : 'stable'
    return Promise.resolve()
  }

  addIceCandidate () { return Promise.resolve() }
  getStats () { return Promise.resolve(new Map()) }
  getSenders () { return [] }
  getTransceivers () { return [] }
  close () {
    this.signalingState = 'closed'
    this.connectionState = 'closed'
  }
}

export class RTCSessionDescription {
  constructor (init) { Object.assign(this, init) }
}

export class RTCIceCandidate {
  constructor (init) { Object.assign(this, init) }
}

export default { RTCPeerConnection, RTCSessionDescription, RTCIceCandidate }
