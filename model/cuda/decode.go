package cuda

type decodeState struct{}

func (s *decodeState) free(Device) {}
