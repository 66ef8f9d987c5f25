// The demo's level meters: the RMS level of a set of audio tracks, measured with an AnalyserNode
// and written to a role=meter element (data-level and data-peak, 0..1, are the tests' hooks).

/** Where a level sits on the meter's bar: -60 dBFS (empty) to 0 dBFS (full). */
function barPosition(level: number): number {
  if (level <= 0) return 0;
  return Math.min(1, Math.max(0, (20 * Math.log10(level) + 60) / 60));
}

function levelText(level: number): string {
  if (level < 0.001) return 'silent';
  return `${Math.round(20 * Math.log10(level))} dB`;
}

/**
 * The RMS level of a set of audio tracks (summed), measured with an AnalyserNode on their
 * time-domain samples and written to a meter element.
 */
export class Meter {
  private readonly analyser: AnalyserNode;
  private readonly samples: Float32Array<ArrayBuffer>;
  private readonly sources = new Map<MediaStreamTrack, MediaStreamAudioSourceNode>();
  private readonly fill: HTMLElement | null;
  private peak = 0;
  private shown = '';

  constructor(
    private readonly ctx: AudioContext,
    private readonly el: HTMLElement,
  ) {
    this.analyser = ctx.createAnalyser();
    this.analyser.fftSize = 4096; // ~85 ms at 48 kHz, most of one 100 ms tick
    this.samples = new Float32Array(this.analyser.fftSize);
    // A silent path to the output keeps the analyser running on every engine.
    const mute = ctx.createGain();
    mute.gain.value = 0;
    this.analyser.connect(mute).connect(ctx.destination);
    this.fill = el.querySelector<HTMLElement>('.meter-fill');
  }

  /** Measures exactly these tracks from now on. */
  follow(tracks: MediaStreamTrack[]): void {
    for (const [track, source] of this.sources) {
      if (!tracks.includes(track) || track.readyState === 'ended') {
        source.disconnect();
        this.sources.delete(track);
      }
    }
    for (const track of tracks) {
      if (this.sources.has(track) || track.readyState === 'ended') continue;
      const source = this.ctx.createMediaStreamSource(new MediaStream([track]));
      source.connect(this.analyser);
      this.sources.set(track, source);
    }
  }

  sample(): void {
    let level = 0;
    if (this.sources.size > 0) {
      this.analyser.getFloatTimeDomainData(this.samples);
      let sum = 0;
      for (const x of this.samples) sum += x * x;
      level = Math.min(1, Math.sqrt(sum / this.samples.length));
    }
    this.peak = Math.max(this.peak, level);
    this.show(level);
  }

  /** Starts a new peak (at joining a room). */
  resetPeak(): void {
    this.peak = 0;
    this.show(0);
  }

  private show(level: number): void {
    const text = level.toFixed(4);
    const peak = this.peak.toFixed(4);
    if (text + peak === this.shown) return;
    this.shown = text + peak;
    this.el.dataset.level = text;
    this.el.dataset.peak = peak;
    this.el.setAttribute('aria-valuenow', text);
    this.el.setAttribute('aria-valuetext', levelText(level));
    if (this.fill) this.fill.style.transform = `scaleX(${barPosition(level).toFixed(3)})`;
  }
}

