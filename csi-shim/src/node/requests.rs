//! The node's request server: changes the controller asks of the node where a thin pool is
//! active ([`crate::volume::Request`]), made here as the pool's holder.

use lvmeta::activate;

use super::Node;
use crate::kubelet::Place;

/// A staged thin volume, as the request server needs it.
struct ThinStaged {
    vg: String,
    lv: String,
    pool: String,
    /// The volume id (to find its staging again).
    id: String,
    /// A filesystem volume (its mount is frozen around a cut).
    mounted: bool,
}

impl Node {
    /// Serves the requests posted on the pools of the thin volumes staged here (see
    /// [`crate::volume::Request`]): for each, freezes the filesystem whose data it takes,
    /// makes the change as the pool's holder, delivers it to the kernel pool, thaws, and
    /// removes the request. A request that fails is logged and removed, so the controller
    /// stops waiting for it.
    pub fn serve_requests(&self) {
        let mut pools: Vec<ThinStaged> = Vec::new();
        for (id, s) in self.staged().iter() {
            let Some(p) = s.activation.as_ref().map(|a| &a.placement) else {
                continue;
            };
            let activate::Layout::Thin { pool, .. } = &p.layout else {
                continue;
            };
            pools.push(ThinStaged {
                vg: p.vg.clone(),
                lv: p.lv.clone(),
                pool: pool.name.clone(),
                id: id.clone(),
                mounted: s.fs.is_some(),
            });
        }
        for t in &pools {
            // on_host: a volume active here is never deleted for a request.
            let holder = crate::volume::Volumes::new(self.backend.session(), &t.vg)
                .holding(vec![t.pool.clone()])
                .on_host(self.config.activation.as_ref());
            let requests = match holder.fresh_requests(&t.pool) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(vg = %t.vg, pool = %t.pool, error = %e, "reading requests");
                    continue;
                }
            };
            for r in requests {
                let _serving = self.serving.lock().unwrap_or_else(|p| p.into_inner());
                if !self.staged().contains_key(&t.id) {
                    break;
                }
                let result = self.serve_one(&holder, t, &pools, &r);
                let tag = r.to_string();
                match &result {
                    Ok(()) => {
                        tracing::info!(vg = %t.vg, pool = %t.pool, request = %tag, "served a request")
                    }
                    Err(e) => {
                        tracing::warn!(vg = %t.vg, pool = %t.pool, request = %tag, error = %e, "request failed; dropping it")
                    }
                }
                if let Err(e) = holder.finish(&t.pool, &r) {
                    tracing::warn!(vg = %t.vg, pool = %t.pool, request = %tag, error = %e, "removing the request");
                }
            }
        }
    }

    /// One request on `t`'s pool, made through `holder`: the filesystem it reads frozen
    /// around the change and its delivery to the kernel pool.
    fn serve_one(
        &self,
        holder: &crate::volume::Volumes<'_>,
        t: &ThinStaged,
        all: &[ThinStaged],
        r: &crate::volume::Request,
    ) -> Result<(), String> {
        let sys = &self.config.system;
        let frozen: Option<Place> = r
            .reads_volume()
            .and_then(|v| all.iter().find(|s| s.vg == t.vg && s.lv == v && s.mounted))
            .and_then(|s| self.staging_of(&s.id));
        if let Some(at) = &frozen {
            sys.freeze(at, true).map_err(|e| e.to_string())?;
        }
        let done = holder.serve(r).map_err(|e| e.to_string()).and_then(|()| {
            // The kernel pool takes the queue; then a commit clears it.
            let delivered = self.backend.session().refresh(
                &t.vg,
                &t.lv,
                self.config.activation.as_ref(),
            );
            delivered.map(drop).map_err(|e| {
                // Committed but not cut in the kernel: undone, never reported as made.
                if let Err(u) = holder.undo(r) {
                    tracing::error!(vg = %t.vg, pool = %t.pool, request = %r, error = %u, "could not undo a request the kernel pool did not take");
                }
                e.to_string()
            })
        });
        if let Some(at) = &frozen {
            if let Err(e) = sys.freeze(at, false) {
                tracing::error!(path = %at.path().display(), error = %e, "could not thaw the filesystem");
                return done.and(Err(e.to_string()));
            }
        }
        done
    }
}
