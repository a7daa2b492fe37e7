//! Whose room a waiting request needs: the pods routing may send it to (its model's, within
//! its subset hint), not the whole pool's. In a pool of several models, one model's full
//! pods then hold its own requests in the gateway, in their release order, while another
//! model's requests go past them to pods with room.
//!
//! The release order still holds where requests compete for the same pods: a request that
//! does not fit keeps its turn on its pods (a request of many choices waiting for them to
//! free up), so no request after it that may use any of them goes first. Requests whose
//! pods it does not share go on. With one model (or none read) every request may use every
//! pod, and this is the pool's room and the release order as before.

use picker::address::PodAddress;
use picker::config::FlowControlConfig;
use picker::route::{eligible_positions, ModelQuery};
use picker::saturation::SaturationLimits;

use super::pods::Shape;
use super::saturation::{pod_places, FreePlaces, PodLoad};

/// Where a request may be sent, as routing reads it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reach<'a> {
    /// The model it is routed as (its rewrite target, else its body's); `None`: any pod.
    pub model: Option<&'a str>,
    /// The gateway's subset hint.
    pub subset: Option<&'a [PodAddress]>,
}

/// What a request's pods have for it.
pub(super) enum Room {
    /// The free places of the pods it may go to.
    Places(FreePlaces),
    /// No pod may take it (its model's pods left, its subset hint names none): it goes now, to
    /// be answered as a request arriving now would be (404, 503).
    Refused,
    /// A request before it in release order keeps its turn on one of its pods.
    Kept,
}

/// The pods of one look at the pool, with their free places and the turns kept on them.
pub(super) struct PodRooms<'t> {
    shape: Option<Shape<'t>>,
    unknown_model: picker::config::UnknownModelPolicy,
    places: Vec<FreePlaces>,
    /// Each pod's position in the table.
    positions: Vec<usize>,
    /// The look's index of each table position, built at the first request for a model (`u32::MAX`: not among the pods looked at,
    /// such as a prefill pod under P/D, or one left out for failing).
    by_position: Vec<u32>,
    /// The whole pool's places.
    pub pool: FreePlaces,
    /// Pods a request that could not go keeps its turn on.
    kept: Vec<bool>,
    /// Some pod's turn is kept (else `kept` need not be read).
    any_kept: bool,
    /// How many pods' turns are kept.
    kept_pods: usize,
    /// The pods of the last request judged, by look index (reused).
    reached: Vec<u32>,
}

impl<'t> PodRooms<'t> {
    pub fn new(
        pods: &[PodLoad<'_>],
        shape: Option<Shape<'t>>,
        limits: &SaturationLimits,
        flow: &FlowControlConfig,
        unknown_model: picker::config::UnknownModelPolicy,
    ) -> Self {
        let places: Vec<FreePlaces> = pods.iter().map(|pod| pod_places(pod, limits, flow)).collect();
        let pool = places.iter().fold(FreePlaces::default(), |sum, pod| sum.with(*pod));
        let positions = pods.iter().map(|pod| pod.position).collect();
        let kept = vec![false; pods.len()];
        Self {
            shape,
            unknown_model,
            places,
            positions,
            by_position: Vec::new(),
            pool,
            kept,
            any_kept: false,
            kept_pods: 0,
            reached: Vec::new(),
        }
    }

    /// The room of the pods `reach` may go to.
    pub fn of(&mut self, reach: Reach<'_>) -> Room {
        let whole_pool = reach.model.is_none() && reach.subset.is_none();
        let Some(shape) = self.shape.filter(|_| !whole_pool) else {
            // Every pod (the static pool has no models to tell them apart by).
            self.reached.clear();
            self.reached.extend((0..self.places.len()).filter_map(|i| u32::try_from(i).ok()));
            return if self.any_kept { Room::Kept } else { Room::Places(self.pool) };
        };
        let query = ModelQuery {
            model: reach.model,
            unknown_model: self.unknown_model,
            subset: reach.subset,
            index: Some(shape.models),
        };
        let Ok(eligible) = eligible_positions(shape.table, &query) else { return Room::Refused };
        if self.by_position.is_empty() {
            self.by_position.resize(shape.table.pods.len(), u32::MAX);
            for (index, &position) in self.positions.iter().enumerate() {
                if let (Some(slot), Ok(index)) = (self.by_position.get_mut(position), u32::try_from(index)) {
                    *slot = index;
                }
            }
        }
        self.reached.clear();
        let by_position = &self.by_position;
        self.reached.extend(eligible.iter().filter_map(|&p| by_position.get(p).copied().filter(|&i| i != u32::MAX)));
        let kept = &self.kept;
        if self.any_kept && self.reached.iter().any(|&i| kept.get(i as usize).copied().unwrap_or(false)) {
            return Room::Kept;
        }
        let places = &self.places;
        Room::Places(
            self.reached
                .iter()
                .filter_map(|&i| places.get(i as usize))
                .fold(FreePlaces::default(), |sum, pod| sum.with(*pod)),
        )
    }

    /// The request last judged ([`PodRooms::of`]) could not go: it keeps its turn on its pods.
    pub fn keep_turn(&mut self) {
        for &i in &self.reached {
            if let Some(kept) = self.kept.get_mut(i as usize) {
                if !*kept {
                    self.kept_pods += 1;
                }
                *kept = true;
                self.any_kept = true;
            }
        }
    }

    /// Every pod's turn is kept: no request may go now but one no pod will take.
    pub fn all_kept(&self) -> bool {
        self.kept_pods >= self.kept.len()
    }
}
