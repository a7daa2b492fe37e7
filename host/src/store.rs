//! [`picker::store::SharedStore`] over Envoy's shared data.

use picker::store::{SharedStore, StoreError, Versioned};
use proxy_wasm::hostcalls;
use proxy_wasm::types::Status;

/// Shared data of this VM id, as the host keeps it.
pub struct ProxyStore;

impl SharedStore for ProxyStore {
    fn get(&self, key: &str) -> Result<Versioned, StoreError> {
        match hostcalls::get_shared_data(key) {
            Ok((value, cas)) => Ok((value, cas)),
            Err(Status::NotFound) => Ok((None, None)),
            Err(status) => Err(StoreError::Host(format!("get_shared_data({key}): {status:?}"))),
        }
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), StoreError> {
        match hostcalls::set_shared_data(key, Some(value), cas) {
            Ok(()) => Ok(()),
            Err(Status::CasMismatch) => Err(StoreError::CasMismatch),
            Err(status) => Err(StoreError::Host(format!("set_shared_data({key}): {status:?}"))),
        }
    }
}
