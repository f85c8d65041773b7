package cuda

import (
	"math"
)

func dot32(a, b []float32) float32 {
	var s float32
	for i, v := range a {
		s += v * b[i]
	}
	return s
}

// Attention implements Kernels: per query row, the scores of keys 0..i,
// their log-sum-exp and the weighted values; no T×T matrix is kept.
func (*CPU) Attention(o, lse, q, k, v Tensor, s AttnShape) {
	os, ls, qs, ks, vs := o.f32(), lse.f32(), q.f32(), k.f32(), v.f32()
	T, HD := s.T, s.HD
	qw, kw := s.H*HD, s.KVH*HD
	group := s.H / s.KVH
	parallelFor(s.B*s.H, func(lo, hi int) {
		sc := make([]float32, T)
		for bh := lo; bh < hi; bh++ {
			b, h := bh/s.H, bh%s.H
			kh := h / group
			for i := 0; i < T; i++ {
				n := b*T + i
				qi := qs[n*qw+h*HD : n*qw+(h+1)*HD]
				m := float32(math.Inf(-1))
				for j := 0; j <= i; j++ {
					kj := ks[(b*T+j)*kw+kh*HD : (b*T+j)*kw+(kh+1)*HD]
					sc[j] = dot32(qi, kj) * s.Scale
					m = max(m, sc[j])
				}
				var l float64
				for j := 0; j <= i; j++ {
					e := math.Exp(float64(sc[j] - m))
					sc[j] = float32(e)
					l += e
				}
				oi := os[n*qw+h*HD : n*qw+(h+1)*HD]
				clear(oi)
				inv := float32(1 / l)
				for j := 0; j <= i; j++ {
					p := sc[j] * inv
					vj := vs[(b*T+j)*kw+kh*HD : (b*T+j)*kw+(kh+1)*HD]
					for d := range oi {
						oi[d] += p * vj[d]
					}
				}
				ls[n*s.H+h] = m + float32(math.Log(l))
			}
		}
	})
}

// AttentionBackward implements Kernels (FlashAttention-2's backward):
// p = exp(q·k·scale − lse), dv += p·do, ds = p·(do·v − delta), dq +=
// ds·scale·k, dk += ds·scale·q. Work is split by (sequence, kv head) so
// that heads sharing a kv head accumulate into it without races.
func (*CPU) AttentionBackward(dq, dk, dv, delta, q, k, v, o, do Tensor, lse Tensor, s AttnShape) {
	dqs, dks, dvs, dls := dq.f32(), dk.f32(), dv.f32(), delta.f32()
	qs, ks, vs, osl, dos, ls := q.f32(), k.f32(), v.f32(), o.f32(), do.f32(), lse.f32()
	T, HD := s.T, s.HD
	qw, kw := s.H*HD, s.KVH*HD
	group := s.H / s.KVH
	N := s.B * T
	for n := 0; n < N; n++ {
		for h := 0; h < s.H; h++ {
			off := n*qw + h*HD
			dls[n*s.H+h] = dot32(dos[off:off+HD], osl[off:off+HD])
		}
	}
	clear(dqs[:N*qw])
	clear(dks[:N*kw])
	clear(dvs[:N*kw])
	parallelFor(s.B*s.KVH, func(lo, hi int) {
		for bk := lo; bk < hi; bk++ {
			b, kh := bk/s.KVH, bk%s.KVH
			for h := kh * group; h < (kh+1)*group; h++ {
				for i := 0; i < T; i++ {
					n := b*T + i
					qi := qs[n*qw+h*HD : n*qw+(h+1)*HD]
					doi := dos[n*qw+h*HD : n*qw+(h+1)*HD]
					dqi := dqs[n*qw+h*HD : n*qw+(h+1)*HD]
					l, dl := ls[n*s.H+h], dls[n*s.H+h]
					for j := 0; j <= i; j++ {
						m := b*T + j
						kj := ks[m*kw+kh*HD : m*kw+(kh+1)*HD]
						vj := vs[m*kw+kh*HD : m*kw+(kh+1)*HD]
						p := float32(math.Exp(float64(dot32(qi, kj)*s.Scale - l)))
						dvj := dvs[m*kw+kh*HD : m*kw+(kh+1)*HD]
						dkj := dks[m*kw+kh*HD : m*kw+(kh+1)*HD]
						ds := p * (dot32(doi, vj) - dl) * s.Scale
						for d := 0; d < HD; d++ {
							dvj[d] += p * doi[d]
							dqi[d] += ds * kj[d]
							dkj[d] += ds * qi[d]
						}
					}
				}
			}
		}
	})
}

// AttentionDecode implements Kernels.
func (*CPU) AttentionDecode(o, q, kc, vc, slot, length Tensor, r int, s CacheShape) {
	os, qs, ks, vs, sl, ln := o.f32(), q.f32(), kc.f32(), vc.f32(), slot.i32(), length.i32()
	HD := s.HD
	qw, kw := s.H*HD, s.KVH*HD
	group := s.H / s.KVH
	parallelFor(r*s.H, func(lo, hi int) {
		sc := make([]float32, s.Cap)
		for rh := lo; rh < hi; rh++ {
			i, h := rh/s.H, rh%s.H
			kh := h / group
			base := int(sl[i]) * s.Cap * kw
			L := int(ln[i])
			qi := qs[i*qw+h*HD : i*qw+(h+1)*HD]
			m := float32(math.Inf(-1))
			for j := 0; j < L; j++ {
				sc[j] = dot32(qi, ks[base+j*kw+kh*HD:base+j*kw+(kh+1)*HD]) * s.Scale
				m = max(m, sc[j])
			}
			var l float64
			for j := 0; j < L; j++ {
				e := math.Exp(float64(sc[j] - m))
				sc[j] = float32(e)
				l += e
			}
			oi := os[i*qw+h*HD : i*qw+(h+1)*HD]
			clear(oi)
			inv := float32(1 / l)
			for j := 0; j < L; j++ {
				p := sc[j] * inv
				vj := vs[base+j*kw+kh*HD : base+j*kw+(kh+1)*HD]
				for d := range oi {
					oi[d] += p * vj[d]
				}
			}
		}
	})
}

// KVWrite implements Kernels.
func (*CPU) KVWrite(kc, vc, k, v, slot, pos Tensor, r int, s CacheShape) {
	kw := s.KVH * s.HD
	kcs, vcs, ks, vs, sl, ps := kc.f32(), vc.f32(), k.f32(), v.f32(), slot.i32(), pos.i32()
	for i := 0; i < r; i++ {
		at := (int(sl[i])*s.Cap + int(ps[i])) * kw
		copy(kcs[at:at+kw], ks[i*kw:(i+1)*kw])
		copy(vcs[at:at+kw], vs[i*kw:(i+1)*kw])
	}
}
