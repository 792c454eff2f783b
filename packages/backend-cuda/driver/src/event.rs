//! CUDA events: a point in the stream's work whose time the GPU records, so the
//! time between two is what the GPU spent on the work enqueued between them (the
//! benches time kernels this way, apart from the host's time enqueueing them).

use std::sync::Arc;

use cudarc::driver::{result, sys};

use crate::{Device, Error, Result};

/// A recorded event of one device's stream, destroyed on drop.
pub struct Event {
    device: Arc<Device>,
    event: sys::CUevent,
}

// SAFETY: an event is a driver object usable from any thread with the context current
// (every call binds it first).
unsafe impl Send for Event {}
unsafe impl Sync for Event {}

impl Device {
    /// An event recorded on the stream after everything enqueued so far.
    pub fn record_event(self: &Arc<Self>) -> Result<Event> {
        self.bind()?;
        let event = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)?;
        let recorded = Event {
            device: self.clone(),
            event,
        };
        // SAFETY: an event just created, the device's own stream.
        unsafe { result::event::record(recorded.event, self.raw_stream()) }?;
        Ok(recorded)
    }
}

impl Event {
    /// Milliseconds the GPU spent between this event and `later` (recorded after it
    /// on the same device), waiting for `later` first.
    pub fn elapsed_ms(&self, later: &Event) -> Result<f32> {
        if !Arc::ptr_eq(&self.device, &later.device) {
            return Err(crate::error(
                "events of two devices have no elapsed time between them",
            ));
        }
        self.device.bind()?;
        // SAFETY: both events were created and recorded by `record_event` on this
        // device's one stream and live until dropped.
        unsafe {
            result::event::synchronize(later.event)?;
            result::event::elapsed(self.event, later.event).map_err(Error::from)
        }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.device.bind().is_ok() {
            // SAFETY: created by `record_event`, destroyed once.
            unsafe {
                let _ = result::event::destroy(self.event);
            }
        }
    }
}
